"""Verification and KLD passes: agreement with regenerated answers, what each pass costs, how passes are cut."""
