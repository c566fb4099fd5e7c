"""Stations that make and clean a document's text: extraction, normalization, PII redaction, Markdown chunking."""
