"""The result schema and its statistics: what a row, a series, a cell and a run hold, the metric
declarations that drive every table, compare field and report column, the load checks, and the
numbers derived from a rank x round matrix (one median, one weighted alpha-beta fit, quantiles).

The writer (harness/) and the readers (reports/) both import it; it imports no package of ours
(numpy and the standard library only), so either side can change without the other.
"""
