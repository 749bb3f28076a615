"""What people type and see: ``miles-launch`` and its subcommands, progress, logs, tables."""
