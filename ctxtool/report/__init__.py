"""The self-contained HTML report: its charts and its page."""
