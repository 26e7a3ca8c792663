"""What each step computes: the scheduler (admission, preemption, chunking), a group's shape and its
cost against a budget, and one forward's layout of tokens, slots and spans."""
