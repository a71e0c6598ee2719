"""Fairlane evaluation: does placing by live GPU health make synchronous jobs finish sooner?"""
