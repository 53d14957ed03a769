"""The end-to-end fault campaign: every acknowledged record stays readable, once and in order, while the
parts around it fail (issue 34). ``make campaign ROUNDS=N SEED=S`` for long runs; CI runs a short one."""
