"""HTTP gateway of the reward service: ``protocol`` (models), ``serving`` (logic), ``router``."""
