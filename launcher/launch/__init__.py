"""One launch: the provider that starts and supervises the cells, the job, the launch's services and state."""
