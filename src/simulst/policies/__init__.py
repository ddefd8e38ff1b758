"""simulst.policies"""
