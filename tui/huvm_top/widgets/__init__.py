"""The widgets of the main screen, one per module."""
