"""Small helpers every layer may use (standard library only): errors, JavaScript values, interrupts, option
choices, secret scanning, markup escaping, atomic file writes.
"""
