"""What `nudge stats` writes and `nudge report` draws, and the pipelines of both commands.

pipeline.py: `run_stats(StatsOptions) -> StatsResult` and `run_report(ReportOptions) ->
ReportResult`, the library side of the two commands; document.py: stats.json and grounding.json
(schema, writing, reading) and the set of files `nudge stats` writes; serialize.py: the JSON form
of the result dataclasses; tables/: the Markdown, CSV and LaTeX tables; figures/: the PNG and PDF
figures; cells.py: the number cells, CSV and LaTeX escaping and figure saving they all share.
"""
