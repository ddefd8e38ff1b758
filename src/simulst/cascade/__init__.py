"""simulst.cascade"""
