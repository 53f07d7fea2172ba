"""Screens besides the main one, one per module."""
