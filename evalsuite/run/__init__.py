"""Runner and store: generate for the baseline and every variant on identical samples; store as you go."""
