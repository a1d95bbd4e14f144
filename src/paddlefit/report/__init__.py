"""Rendering: rich tables and JSON documents (no computation here)."""
