"""The pytest session: options, the plugin's hooks, run order, one session's state, what it writes
and the gates it ends with; it never imports the CLI, the emulated cluster or the doctor."""
