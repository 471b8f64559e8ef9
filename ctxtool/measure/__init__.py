"""Measuring a request: token limits, Gemini CLI's token estimator, prices."""
