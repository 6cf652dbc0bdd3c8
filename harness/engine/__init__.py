"""The execution engine: worker groups of rank processes (start, send a spec, collect, hang and
death detection), their control channel, launch command lines, MPI shared-memory cleanup, and the
rank process itself. It never imports the pytest session, the CLI, the cluster or the doctor."""
