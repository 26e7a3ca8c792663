"""What each step computes: admission, preemption, chunking and one forward's layout."""
