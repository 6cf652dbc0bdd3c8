"""Parallel layers under test: rank mesh, tensor-parallel linear, pipeline stages, memory model."""
