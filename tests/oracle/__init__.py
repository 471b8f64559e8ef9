"""The frames' own derivation of every figure, in polars: how ctxtool computed its frames and reports
before one engine (``ctxtool.frames.tally``, ``ctxtool.frames.views``) made them all. Kept here, and only
here, as an oracle the engine is held to: a second implementation written another way, in another library,
over the same columns (``tests/test_views.py``, ``tests/test_tally.py``, ``tests/test_engine_frames.py``).
"""
