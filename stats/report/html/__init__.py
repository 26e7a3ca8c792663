"""report.html: one self-contained page with every table, figure and the run's provenance, and a
problem browser over the records (data.py builds the JSON, page.py the page, browser.js and
page.css are inlined into it, and cuts.js for a run with extra cuts)."""
