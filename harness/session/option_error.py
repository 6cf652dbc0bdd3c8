"""The one error of the options, its own module so that options.py, stack_env.py and world.py raise it
without importing each other; the plugin turns it into pytest's usage error (exit code 4)."""


class OptionError(ValueError):
    """One line: what is wrong with the options and what is allowed."""
