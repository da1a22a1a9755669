"""Security-layer constructs: the project key every stack encrypts with."""
