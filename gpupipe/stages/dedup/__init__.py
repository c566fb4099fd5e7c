"""Stations that drop repeated documents or passages: exact, URL, MinHash+LSH near, semantic and substring dedup."""
