"""Independent checkers over the synthesized templates: IAM policy lint, AWS Guard rules, States Language."""
