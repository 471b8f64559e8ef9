"""ctxtool inside Gemini CLI: commands Gemini CLI runs as hooks (``settings.json`` ``hooks``).

``ledger`` tallies what sessions billed, fast enough to run before every model call; ``guard`` is the
``BeforeModel`` hook that holds a session to budgets; ``archive`` the ``SessionEnd``/``PreCompress`` hook that
keeps sessions in the Parquet dataset of ``ctxtool export``; ``settings`` installs and removes them in Gemini
CLI's ``settings.json``. Hook input and answers follow Gemini CLI 0.61.0 (its hook event handler and
``hookSystem.fireBeforeModelEvent``; /work/shared/spec/gemini-cli-hooks.md). Never prints to a terminal of its
own: the CLI modules (``ctxtool.cli.guard``, ``.hooks``, ``.archive``) are thin.
"""
