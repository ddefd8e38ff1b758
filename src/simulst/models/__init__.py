"""simulst.models"""
