"""One run: scenario -> world (``world``) -> simulation -> tables (``tables``) -> run
directory (``output``), wired by ``runner``.

May import every layer below the commands, ``mecsim.analysis`` included.
"""
