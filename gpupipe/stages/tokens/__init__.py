"""Stations that turn curated text into training tokens: tokenization, the dataset mixture, fixed-length packing."""
