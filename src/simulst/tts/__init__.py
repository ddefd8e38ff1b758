"""simulst.tts"""
