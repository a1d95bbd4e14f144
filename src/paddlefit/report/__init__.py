"""Rendering for the CLI: rich tables and JSON documents of plans, catalogs and costs (:mod:`.render`); no
computation here, the numbers come from the core. Not a core package: it imports rich."""
