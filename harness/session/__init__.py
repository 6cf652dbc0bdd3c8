"""The pytest session: options, the plugin's hooks, the run order and progress, one session's
state (session.py), what it writes and shows, and the gates it ends with. It drives the engine
and never imports the CLI, the emulated cluster or the doctor."""
