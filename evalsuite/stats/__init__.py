"""Paired statistics: bootstrap CIs, flips, McNemar, agreement, KL divergence from the baseline."""
