"""Command-line entry points: ``fastlog-server`` and the ``fastlog`` admin/console tool."""
