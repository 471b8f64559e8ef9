"""The port of Gemini CLI's chat compression (by version profile), its prompts, model configs and the
environment text it sends.
"""
