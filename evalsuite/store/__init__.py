"""What a run stores, torch-free: sample records (``records``), the SQLite store (``sqlite``), its typed, versioned
run state (``state``) and bulk writes (``bulk``).

gate/, stats/ and report/ read runs through this package only."""
