"""Security pieces every layer shares: the project key every stack encrypts with, and the closed security group."""
