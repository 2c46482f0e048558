"""Fake external services speaking their real HTTP protocols on 127.0.0.1, scripted per test."""
