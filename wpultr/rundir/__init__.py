"""The run directory: its file and stage names (`layout`) and how its files are written and checked (`files`)."""
