__all__ = ['ttypes', 'constants', 'Master', 'Scheduler', 'Agent', 'Executor', 'Tool']
