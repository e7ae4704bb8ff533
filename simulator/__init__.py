"""Replays the UCI Adult data set as devices and compares local DP with central baselines."""
