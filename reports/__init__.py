"""Comparison and rendering: tables, verdicts, plots, HTML/Markdown."""
