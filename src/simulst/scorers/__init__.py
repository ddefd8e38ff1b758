"""simulst.scorers"""
