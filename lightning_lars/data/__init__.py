"""Data: demo dataset, ImageFolder -> FFCV conversion, Lightning DataModules."""
