"""Checks that need tools outside Python (Node.js packages from npm) and the helpers they share."""
