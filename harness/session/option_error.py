"""The one error of the options: its own module so that the modules that check them (options.py,
stack_env.py, world.py) all raise it without importing each other; the plugin turns it into
pytest's usage error (exit code 4)."""


class OptionError(ValueError):
    """One line: what is wrong with the options and what is allowed."""
