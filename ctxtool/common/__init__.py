"""Small helpers every layer may use (standard library only): errors, JavaScript values, interrupts, option
choices, secret scanning, markup escaping, plurals. Holds nothing itself: the console script imports this
package before its signal handlers are in (``ctxtool.common.interrupt``).
"""
