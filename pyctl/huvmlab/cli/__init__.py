"""huvmctl subcommands of the lab."""
