"""Stations that keep or drop a document by what it is: language, quality rules and models, URLs, benchmark overlap."""
