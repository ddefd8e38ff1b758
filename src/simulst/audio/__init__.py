"""simulst.audio"""
