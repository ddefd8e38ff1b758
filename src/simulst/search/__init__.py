"""simulst.search"""
