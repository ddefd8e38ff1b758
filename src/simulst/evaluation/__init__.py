"""simulst.evaluation"""
