"""Cost reports, summaries and plots built from a run's tables."""

from mecsim.analysis.costs import summarize, time_split
from mecsim.analysis.report import render_report

__all__ = ["render_report", "summarize", "time_split"]
