"""Reading, finding and writing Gemini CLI session files."""
