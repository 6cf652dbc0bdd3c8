"""Runs hccl-bench across ranks: worker groups, launchers, control channel, pytest plugin, results."""
