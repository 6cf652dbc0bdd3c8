"""The result schema and its statistics: rows, series, cells and runs, their load checks and the
numbers derived from a rank x round matrix. It imports no package of ours, so the writer (harness/)
and the readers (reports/) can change apart."""
