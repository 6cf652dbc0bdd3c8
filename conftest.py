"""Root conftest: registers the hccl-bench plugin so its options exist for benches/ and tests/."""
pytest_plugins = ["harness.session.plugin"]
